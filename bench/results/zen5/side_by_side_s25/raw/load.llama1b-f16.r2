 19:50:37 up  3:51,  0 user,  load average: 1.99, 1.87, 1.61
