 15:27:11 up 16:00,  0 user,  load average: 1.97, 1.95, 1.67
